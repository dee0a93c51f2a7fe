"""``asynctask api``: the HTTP API's command. asynctask's command line declares its options
and finds this function through the ``asynctask.commands`` entry point group, so the library
never imports the web app."""

from __future__ import annotations

import argparse

from asynctask.modules import load_module
from asynctask.settings import Settings
from webapi.config import ApiConfig
from webapi.server import serve


def run_api(args: argparse.Namespace, settings: Settings) -> int:
    """Load the jobs' modules, then serve the API with gunicorn until it is stopped."""
    config = ApiConfig.from_env(settings=settings)
    for module in settings.require:
        load_module(module)
    serve(
        config,
        host=args.host,
        port=args.port,
        workers=args.workers,
        threads=args.threads,
        access_log=args.access_log,
    )
    return 0
