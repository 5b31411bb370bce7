"""reports.analysis."""
