"""`piwf-top`: a Rich live console of a running host (model: data gathering, render: pure screen, app: loop)."""
