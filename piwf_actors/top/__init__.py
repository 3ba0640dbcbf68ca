"""`piwf-top`: a k9s-style live console of a running host (keys: terminal input, model: data gathering,
state: keys → console state and confirmed commands, panes + render: the pure screen, app: the loop)."""
