from buildctl.cli import run

run()
