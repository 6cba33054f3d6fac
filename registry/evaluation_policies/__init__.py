"""An adapter's evaluation policy: the suites of its own task, and how a challenger is judged
against the version it would replace."""
