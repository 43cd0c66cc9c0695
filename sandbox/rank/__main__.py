import sys

from sandbox.rank.zygote import main

sys.exit(main())
