"""Publishing and inspecting images: push, verify, BOM, SBOM, provenance."""
