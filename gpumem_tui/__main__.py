from gpumem_tui.cli import run

run()
