"""reports.sections."""
