"""The node's aiohttp server: the application, its routes, request bodies,
query strings and answers, the stream, the long polls, authentication and
the metrics."""
