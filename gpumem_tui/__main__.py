from gpumem_tui.cli import main

raise SystemExit(main())
