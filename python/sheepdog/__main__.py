from . import _main

_main()
