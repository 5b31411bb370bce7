"""The application (floor 5): the ``moetune`` command line; logging set up at start-up."""
