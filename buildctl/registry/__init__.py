"""The OCI registry HTTP API, credentials, attached evidence."""
