"""ddpdoctor's terminal UI (Textual): `ddpdoctor ui PATH` and `ddpdoctor run --ui`; entry points in app.py."""
