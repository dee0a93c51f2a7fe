"""Blueprints."""
