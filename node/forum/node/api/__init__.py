"""The wire contract both ends share: the HTTP and stream documents
(``model``), the query parameters (``parameters``), the operations
(``operations``), the status document (``status``). Imported by the server
and the client alike, so it imports neither."""
