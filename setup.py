"""Build glue: setuptools runs build.py's ffibuilder (all metadata is in pyproject.toml)."""

from setuptools import setup

setup(cffi_modules=["build.py:ffibuilder"])
