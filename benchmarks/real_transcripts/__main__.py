import sys

from benchmarks.real_transcripts.run import main

sys.exit(main())
