"""``gpuscale shadow-report``: shadow mode's advice against what the live controller did."""
