"""The screens of ddpdoctor's terminal UI: main tabs, one rank's detail, help."""
