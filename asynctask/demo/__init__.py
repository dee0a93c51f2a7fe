"""``asynctask demo``: the whole system on one SQLite file, with no server to install.

``jobs`` holds the sample job and its data, ``progress`` draws the terminal's progress line,
``cli`` runs the worker and the API as child processes and drives them over HTTP.
"""
