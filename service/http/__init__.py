"""The HTTP shell: the server, middlewares, request inputs, errors and JSON."""
