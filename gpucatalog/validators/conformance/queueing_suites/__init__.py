"""The suites that run on either scheduling stack through the queueing contract (``quota_reclaim``,
``gang``), and the picker of the stack's adapter."""
