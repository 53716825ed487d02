from coevolve.cli import main

main()
