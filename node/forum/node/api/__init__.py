"""The wire contract both ends share: the HTTP and stream bodies, the status
document, media types. Imported by the server and the client alike, so it
imports neither."""
