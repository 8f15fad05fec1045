"""The task layer's tests (tasks/)."""
