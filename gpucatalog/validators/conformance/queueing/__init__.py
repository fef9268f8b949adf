"""The queueing contract both scheduling stacks serve (``quota_reclaim`` and ``gang`` stated once)
and its arithmetic."""
