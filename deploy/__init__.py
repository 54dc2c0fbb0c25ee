"""Containers and launchers: the Dataflow image and its flex-template entry point (``dataflow/``), the
trainer image and its torchrun launcher (``trainer/``), Kubernetes (``k8s/``); ``requirements`` reads an
extra's requirements from pyproject.toml for the images. Not installed with the distribution. May import
``pipelines`` (the build it launches), never the trainer (its image has no torch).
"""
