"""The browser stack over time: the state machine (states, events, one step), the budgets
that restart or reboot, the browser limit, and the supervisor thread that runs it all."""
