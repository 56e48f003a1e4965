from tokenroof.cli import main

main()
