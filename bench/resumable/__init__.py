"""The resumable section: what the resumable runtime costs a job of many cheap iterations."""
