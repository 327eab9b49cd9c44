"""Every printer: kubectl-style tables, JSON/YAML documents, colour."""
