"""The widgets of ddpdoctor's terminal UI, one a module."""
