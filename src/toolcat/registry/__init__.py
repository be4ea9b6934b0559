"""Turning what admins write (manifests) into validated ``Toolkit`` definitions."""
