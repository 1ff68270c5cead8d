"""A team's own dataset and model, plugged into the platform's trainer through two hooks."""
