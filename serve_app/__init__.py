"""vidforge serve_app."""
