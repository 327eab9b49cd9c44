"""One module per `kubectl triton` sub-command; each exposes `command`."""
