from fragbench.cli import main

main()
