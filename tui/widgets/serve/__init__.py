"""The Serve tab's widgets, one per concern; the pane (``tui/screens/serve.py``) holds the state and the actions.

Left column: ``profiles.ProfileList`` (the profiles, the running one marked), ``editor.ProfileEditor`` (the numbers
of the selected profile, the fields its algorithm takes, and its extra flags), ``checks.PreflightChecks`` (the
verdict and each check) and ``checks.CommandPreview`` (the command line it runs). Right column:
``state.ServerState`` (the head line with its clock, the phase timeline), ``gpus.GpuList``, ``logbar.LogBar`` (the
log's filter and what it shows) over the log (``tui.widgets.logview.LogView``) and ``hint.ServerHint`` (why it
crashed).
"""
