"""What the user sees while a job runs and when it ends."""
