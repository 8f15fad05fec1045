"""The node's aiohttp server: the application, its routes, the stream, the
long polls, authentication and the metrics."""
