"""The build on Dataflow: ``main`` is the flex template's entry point (the same graph as ``python -m
pipelines.build``), ``dryrun`` translates the job for DataflowRunner offline without submitting it.
"""
