"""Programs that run inside images (standard library only), copied in by the host side."""
