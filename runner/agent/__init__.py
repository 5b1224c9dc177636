"""The in-sandbox agent: stdlib-only Python (3.9+) that runs where the files are.

It is shipped into every sandbox over stdin by runner/controller/bundle.py (under the package name
`runner_agent`) and answers JSON lines: hello, then calls, each answered in order. Nothing in
here may import from outside this package or the standard library.
"""
