from fragbench.cli.commands import main

main()
