"""The replay image, built reproducibly without a container engine (docs/image.md)."""
