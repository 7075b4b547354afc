"""Compatibility modules: ``distribute.compat.tf`` exposes the names TF programs use."""
