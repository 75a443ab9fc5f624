"""What people and clients write: submitted jobs and crawls, an operator's job and host
commands, live controls, database roles, schedules."""
