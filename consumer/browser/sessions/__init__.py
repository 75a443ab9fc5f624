"""Warm WebDriver sessions: the pool, its slots and permits, one session's own calls, a job's
user context cleared, profile sessions, BiDi."""
