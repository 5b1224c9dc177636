"""What runner reports: secret redaction and the audit log."""
