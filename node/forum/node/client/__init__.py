"""The client of a node's API: :class:`~forum.node.client.remote.ForumClient`
over the stream and HTTP, and the blocking
:class:`~forum.node.client.sync.SyncForumClient`. Imports no server module."""
