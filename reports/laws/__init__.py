"""reports.laws."""
