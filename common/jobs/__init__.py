"""What people submit: job files, recurring schedules, politeness limits, webhook signatures."""
