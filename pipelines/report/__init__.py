"""What a build tells a person: the accounting that proves every input record ended in one bucket
(``accounting``), the report (report.json, report.html, SVG ``charts``) and the stage timings
(``timings``: timings.json, timings.html).
"""
