"""What a build tells a person, as files next to its manifest.

* ``accounting``: the books that prove every input record ended in exactly one bucket;
* ``summaries``: the report's summaries, combined inside the pipeline (length histograms, examples per
  reason, token counts, dedupe clusters and similarity, packed lengths);
* ``record``: the report record (report.json's content) and the names of the report's files;
* ``charts``: SVG primitives (panels, bars, histograms, step areas), no plotting library;
* ``plots``: the report's charts, drawn with ``charts``;
* ``html``: the pages (report.html; the page head and table that timings.html shares);
* ``writer``: ``write_report`` and the ``WriteReport`` transform that writes them all;
* ``timings``: the stage timings (timings.json, timings.html), run-dependent, written by the driver.

The room imports Beam, ``pipelines.records``, ``pipelines.metrics``, ``pipelines.clean`` and
``pipelines.options`` (both inside functions), ``schemas`` and ``shardforge.storage``; never the graph,
the stages or a driver. Its modules import one another by public names only.
"""
