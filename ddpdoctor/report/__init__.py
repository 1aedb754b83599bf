"""The report: report.json (schema ddpdoctor.report/1), loading it, the console summary."""
