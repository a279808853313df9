from sensors._cli import main

raise SystemExit(main())
