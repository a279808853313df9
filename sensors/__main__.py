from sensors._cli.main import main

raise SystemExit(main())
