"""What every section shares: the command line, the report writer, processes, the private Redis."""
